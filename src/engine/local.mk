# src/engine: (sources added by its issue)
