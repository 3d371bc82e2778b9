module github.com/slurmscope/slurmscope/tools/gosec

go 1.26.8

require (
	github.com/securego/gosec/v2 v2.22.8
	golang.org/x/tools v0.36.0
)

require (
	github.com/ccojocar/zxcvbn-go v1.0.4 // indirect
	golang.org/x/mod v0.27.0 // indirect
	golang.org/x/sync v0.16.0 // indirect
)
