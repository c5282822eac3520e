"""The server's half of the node link: a remote agent's uplink (``agent_link``), the in-memory
link of role ``all`` (``nodes``), the connected nodes (``registry``), what is read on a node
for the server (remote logs, checkpoint files, TensorBoard points), and the live feeds the
nodes' records fan out to."""
