# src/comm: (sources added by its issue)
