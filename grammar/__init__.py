"""caten's lark grammar, shipped as package data (`caten.grammar`)."""
