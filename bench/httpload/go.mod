module onering.bench/httpload

go 1.22
