"""The HTTP API: request/response models, routes, errors and the OpenAPI document."""
