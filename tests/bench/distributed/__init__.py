"""The distributed benchmark (``make bench-distributed``); see ``__main__`` for what it measures."""
