"""Every run kept: the history of series across commits, and where they changed."""
