module github.com/slurmscope/slurmscope

go 1.26.8
