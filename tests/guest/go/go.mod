module onering.test/guest

go 1.22
