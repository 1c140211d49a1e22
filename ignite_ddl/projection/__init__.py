"""projection"""

__all__: list[str] = []
