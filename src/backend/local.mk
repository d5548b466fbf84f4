# src/backend: (sources added by its issue)
