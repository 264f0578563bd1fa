module onering.bench/gohttp

go 1.22
