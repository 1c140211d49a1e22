"""sweep"""

__all__: list[str] = []
