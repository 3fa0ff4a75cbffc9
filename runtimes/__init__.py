"""Runtime plugins, one module each (`caten.runtimes`)."""
