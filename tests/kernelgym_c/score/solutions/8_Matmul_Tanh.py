# exactly 1.5x: not fast at p = 1.5
# fake-result: {"speedup": 1.5}
class ModelNew:
    pass
