// (placeholder: being written)
