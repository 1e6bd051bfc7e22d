"""The only place that starts or attaches to Ray (`runtime`), and the local head that outlives a client
and ends with its runs (`head`)."""
