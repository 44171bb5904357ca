"""Generated protobuf code for PulsarApi.proto (``make proto``); never edit by hand."""
