__all__ = [
  "decentralized",
  "goma",
  "report",
]
