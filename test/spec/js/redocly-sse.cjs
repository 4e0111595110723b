// A Redocly plugin (redocly.yaml at the repository's root): the x-sse-events
// extension of a text/event-stream media type in httpapi/openapi.json maps
// each event name to {description, schema}. Typed here, Redocly walks those
// schemas as it walks any other: it lints them, resolves their $refs, and
// counts the components they name as used.
module.exports = function sseEvents() {
  return {
    id: "sidelock-sse",
    typeExtension: {
      oas3(types) {
        return {
          ...types,
          MediaType: {
            ...types.MediaType,
            properties: { ...types.MediaType.properties, "x-sse-events": "SseEventMap" },
          },
          SseEventMap: { properties: {}, additionalProperties: "SseEvent" },
          SseEvent: { properties: { description: { type: "string" }, schema: "Schema" }, required: ["schema"] },
        };
      },
    },
  };
};
