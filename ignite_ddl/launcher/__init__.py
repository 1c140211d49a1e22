"""launcher"""

__all__: list[str] = []
