__all__ = [
  "dicode",
  "itc",
  "ppo",
  "qrim",
  "r4",
  "uhm",
]
