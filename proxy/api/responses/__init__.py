"""The OpenAI Responses surface (``POST /v1/responses``, ``/v1/responses/input_tokens``): its request
(``request.py``), its answers and typed stream events (``response.py``) and its handlers (``handler.py``)."""
