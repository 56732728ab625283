// node make-workflow.js <name> <path> <responseMode> [withTool]  -> prints public-API create body
const [name, path, responseMode, withTool] = process.argv.slice(2);
const cred = { openAiApi: { id: process.env.CRED_ID, name: 'Fake OpenAI (127.0.0.1:11435)' } };
const nodes = [
  { id: '11111111-1111-4111-8111-000000000001', name: 'Webhook', type: 'n8n-nodes-base.webhook', typeVersion: 2.1,
    position: [0, 0], webhookId: require('crypto').randomUUID(),
    parameters: { httpMethod: 'POST', path, responseMode, options: {} } },
  { id: '11111111-1111-4111-8111-000000000002', name: 'AI Agent', type: '@n8n/n8n-nodes-langchain.agent', typeVersion: 3,
    position: [220, 0],
    parameters: { promptType: 'define', text: '={{ $json.body.chatInput }}', options: { enableStreaming: true, systemMessage: 'You are a recording test agent.' } } },
  { id: '11111111-1111-4111-8111-000000000003', name: 'OpenAI Chat Model', type: '@n8n/n8n-nodes-langchain.lmChatOpenAi', typeVersion: 1.3,
    position: [100, 200], credentials: cred,
    parameters: { model: { __rl: true, mode: 'id', value: 'gpt-fake' }, responsesApiEnabled: false, options: {} } },
  { id: '11111111-1111-4111-8111-000000000004', name: 'Simple Memory', type: '@n8n/n8n-nodes-langchain.memoryBufferWindow', typeVersion: 1.3,
    position: [240, 200],
    parameters: { sessionIdType: 'customKey', sessionKey: '={{ $json.body.sessionId }}' } },
];
const connections = {
  Webhook: { main: [[{ node: 'AI Agent', type: 'main', index: 0 }]] },
  'OpenAI Chat Model': { ai_languageModel: [[{ node: 'AI Agent', type: 'ai_languageModel', index: 0 }]] },
  'Simple Memory': { ai_memory: [[{ node: 'AI Agent', type: 'ai_memory', index: 0 }]] },
};
if (withTool) {
  nodes.push({ id: '11111111-1111-4111-8111-000000000005', name: 'Calculator', type: '@n8n/n8n-nodes-langchain.toolCalculator', typeVersion: 1,
    position: [380, 200], parameters: {} });
  connections.Calculator = { ai_tool: [[{ node: 'AI Agent', type: 'ai_tool', index: 0 }]] };
}
console.log(JSON.stringify({ name, nodes, connections, settings: { executionOrder: 'v1' } }, null, 1));
