"""Alerts that reach someone: pure alert rules over events (``alerts``), the notifier port and its
background dispatcher (``notifier``), the webhook adapter (``webhook``)."""
