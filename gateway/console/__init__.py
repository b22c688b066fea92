"""The web console: a read-only view of the cluster, served by the gateway at /console.

What it shows: cluster health and quorum, nodes and drives, capacity (writable / stranded /
garbage / live as far as the nodes report them), the repair backlog, S3 request rates and
errors (from the gateway's own Prometheus registry), a live zone map of every drive, the
cluster layout with its staged changes and the data mover's progress, and a bucket browser (list, object details, download through a presigned URL). Off with
`[gateway] console = false`.

How it is built: one static page (`static/index.html`, `console.js`, `console.css`: plain
HTML, CSS and JavaScript, no framework, nothing vendored, no build step) over a small JSON API
(`routes.py`), which the page polls every 2 s. A framework (React, htmx, a chart library)
would have to be vendored or fetched from a CDN, and a CDN is exactly what an operator's
network in front of a storage cluster may not reach; the page needs only a few tables and a
grid of coloured cells, which the DOM does well by itself. The server side is starlette, which
the gateway already runs on.

Login is with the S3 credentials of a configured user (access key and secret key in a form
POST); the session is a signed, HttpOnly, SameSite=Strict cookie (`session.py`); login and
logout check Origin, logout also a CSRF token. No secret ever appears in a URL, a response or
a log line.

Modules: `session.py` (cookie signing, CSRF), `data.py` (health, capacity, zone map, request
counters), `shape.py` (the layout view), `browser.py` (buckets, objects, presigning), `routes.py` (endpoints, middleware,
`install` into the gateway's app).
"""
