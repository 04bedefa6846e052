module tailtrim/experiments/proxy/closedloop

go 1.21
