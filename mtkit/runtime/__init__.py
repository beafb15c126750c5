"""Where computation runs: devices, threads, distributed jobs, logging."""
