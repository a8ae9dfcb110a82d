// The API reference page: the app's own OpenAPI document drawn by the vendored
// Swagger UI (web/static/vendor, see VENDORED.md).  validatorUrl null: the
// page never sends the document to swagger.io to be checked.
window.ui = SwaggerUIBundle({
  url: "/api/openapi.json",
  dom_id: "#swagger-ui",
  validatorUrl: null,
  deepLinking: true,
  tryItOutEnabled: false,
});
