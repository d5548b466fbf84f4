# kernels: (sources added by its issue)
