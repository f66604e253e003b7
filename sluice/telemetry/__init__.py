"""What sluice tells about itself: its log lines (``logs``), its Prometheus
metrics (``prometheus``) and their multiprocess directory (``metrics_dir``)."""
