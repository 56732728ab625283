// A minimal CopilotKit app, as a user of @copilotkitnext/react writes one:
// the provider pointed at Threadline's runtime routes (same origin) and the
// stock chat on the thread named by the page's ?thread= query, so that a
// reload comes back to the same thread. The browser test
// (server/copilotkit_browser_test.go) bundles it with the pinned esbuild.
//
// Errors CopilotKit reports (a failed connect or run, which the chat
// itself would only log) are kept in window.copilotkitErrors for the test.
import { createRoot } from "react-dom/client";
import { CopilotChat, CopilotKitProvider } from "@copilotkitnext/react";
import "@copilotkitnext/react/styles.css";

const thread = new URLSearchParams(location.search).get("thread");

window.copilotkitErrors = [];
function onError({ error, code }) {
  window.copilotkitErrors.push(`${code}: ${error && error.message}`);
}

createRoot(document.getElementById("root")).render(
  <CopilotKitProvider runtimeUrl="/copilotkit" onError={onError}>
    <div style={{ height: "100vh" }}>
      <CopilotChat agentId="default" threadId={thread} />
    </div>
  </CopilotKitProvider>,
);
