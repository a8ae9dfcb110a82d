// Receives live steps of one session with the official socket.io-client 4.x,
// the way the dashboard does: subscribe to the session's room, collect
// agent_step events, print them as JSON and exit.
//
//   node live_steps.mjs <base url> <session id> <how many steps> [timeout ms]
import { io } from "socket.io-client";

const [url, sessionId, wanted, timeoutMs = "20000"] = process.argv.slice(2);
const steps = [];
const socket = io(url, { transports: ["websocket"], reconnection: false });

const timer = setTimeout(() => {
  console.error(`timed out with ${steps.length} of ${wanted} steps`);
  process.exit(2);
}, Number(timeoutMs));

socket.on("connect_error", (err) => {
  console.error("connect_error: " + err.message);
  process.exit(3);
});

socket.on("connect", async () => {
  const ack = await socket.emitWithAck("subscribe", { rooms: ["session:" + sessionId] });
  if (!ack.ok) {
    console.error("subscribe refused: " + JSON.stringify(ack));
    process.exit(4);
  }
  console.error("subscribed; epoch " + ack.epoch);
});

socket.on("agent_step", (event) => {
  steps.push({ id: event.id, seq: event.seq, epoch: event.epoch, stream: event.stream,
               iteration: event.data.iteration, session_id: event.data.session_id, text: event.data.text });
  if (steps.length >= Number(wanted)) {
    clearTimeout(timer);
    console.log(JSON.stringify(steps));
    socket.close();
  }
});
