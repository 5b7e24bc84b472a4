"""The Anthropic Messages surface (``POST /v1/messages``, ``/v1/messages/count_tokens``): its request
(``request.py``), its answers and stream events (``response.py``) and its handlers (``handler.py``)."""
