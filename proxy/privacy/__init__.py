"""Privacy: the PII scanner, the data-class policy, reversible redaction and body-free audit.

Pure: imports the stdlib, python-stdnum and phonenumbers only (no aiohttp, no
other ``proxy`` package), so the request path can call it from any stage.
Order in a request: ``scanner.scan_chat`` -> ``policy.decide`` ->
``redact.redact_chat`` -> upstream -> ``redact.restore_chat_response`` or
``redact.ChunkRestorer`` -> ``audit.audit_of`` for the events.
"""
