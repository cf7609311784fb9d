"""TaskFlow decorators the provider registers (``task-decorators`` in provider info)."""
