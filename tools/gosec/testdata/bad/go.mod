module bad

go 1.26
