"""measure"""

__all__: list[str] = []
