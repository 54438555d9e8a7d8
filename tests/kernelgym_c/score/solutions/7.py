# matched by bare id, 0.6x
# fake-result: {"speedup": 0.6}
class ModelNew:
    pass
