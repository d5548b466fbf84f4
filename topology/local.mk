# topology: (sources added by its issue)
