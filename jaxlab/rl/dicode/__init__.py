"""DiCode ("Dreaming in Code", Mitsides, Faldor, Cully; arXiv 2602.08194): model-written Craftax
task programs, a multitask environment over them, and a learnability-driven curriculum.

See docs/dicode.md.
"""
