// An app of wsbridged's WebSocket face written with Node's `ws` (Debian's node-ws), unmodified:
// it connects over a Unix socket (ws+unix:PATH:/), prints `open`, `message TEXT` per message and
// `closed CODE REASON`, and sends each line of its stdin (`send TEXT`). Usage: node ws_node_app.js PATH
const WebSocket = require("ws");
const readline = require("readline");

const ws = new WebSocket(`ws+unix:${process.argv[2]}:/`);
ws.on("open", () => {
  console.log("open");
  readline.createInterface({ input: process.stdin }).on("line", (line) => {
    if (line.startsWith("send ")) ws.send(line.slice(5));
  }).on("close", () => ws.close(1000));
});
ws.on("message", (data, isBinary) => console.log(isBinary ? `binary ${data.toString("hex")}` : `message ${data}`));
ws.on("close", (code, reason) => console.log(`closed ${code} ${reason}`));
ws.on("error", (error) => console.log(`error ${error.message}`));
