# bench: (sources added by its issue)
