"""What crosses between the judge and the candidate worker: typed messages (`messages`), their
framing on the socket (`wire`) and the shared memory that carries tensors (`arena`)."""
