"""trainer"""

__all__: list[str] = []
