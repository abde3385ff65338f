"""Everything this project knows about verl and Trinity-RFT: the registry, pins, tree detection, fetching releases."""
