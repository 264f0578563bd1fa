module onering.bench/go

go 1.22
