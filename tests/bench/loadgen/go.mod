module farebox/bench/loadgen

go 1.26
