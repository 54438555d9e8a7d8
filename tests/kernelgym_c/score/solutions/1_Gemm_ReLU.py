# same file name, 2.5x
# fake-result: {"speedup": 2.5}
class ModelNew:
    pass
