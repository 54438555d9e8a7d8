# matched by id, 1.0x
# fake-result: {"speedup": 1.0}
class ModelNew:
    pass
