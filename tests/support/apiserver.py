"""A double of the Kubernetes API server's ConfigMap and Pod GETs, over real HTTPS on 127.0.0.1.

No kube-apiserver can be installed here; this answers ``GET
/api/v1/namespaces/NS/configmaps/NAME`` and ``.../pods/NAME`` the way the real one does
(JSON object, 401
without the bearer token, 403 for a namespace the token may not read, 404 Status for
a missing one), with a self-signed certificate written beside a service-account
token, as a pod's mount has them.
"""

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.support.certs import self_signed

TOKEN = "test-service-account-token"


def _write_cert(directory: Path) -> tuple[Path, Path]:
    return self_signed(directory / "ca.crt", directory / "server.key", ca=True)


class ApiServer:
    """Serves ``configmaps[(namespace, name)] = data``; ``forbidden`` namespaces answer 403.

    Args:
        account: Directory that gets ``token`` and ``ca.crt``, as a pod's service-account mount.
    """

    def __init__(self, account: Path) -> None:
        account.mkdir(parents=True, exist_ok=True)
        (account / "token").write_text(TOKEN)
        crt, key = _write_cert(account)
        self.account = account
        self.configmaps: dict[tuple[str, str], dict[str, str]] = {}
        self.pods: dict[tuple[str, str], dict] = {}  # (namespace, name) -> metadata
        self.gets: list[str] = []
        self.forbidden: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: object) -> None:
                pass

            def _json(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                parts = self.path.strip("/").split("/")
                server.gets.append(self.path)
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    self._json(401, {"kind": "Status", "code": 401, "reason": "Unauthorized"})
                elif len(parts) != 6 or parts[:2] != ["api", "v1"]:
                    self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                elif parts[3] in server.forbidden:
                    self._json(403, {"kind": "Status", "code": 403, "reason": "Forbidden"})
                elif parts[4] == "pods" and (parts[3], parts[5]) in server.pods:
                    meta = {
                        "name": parts[5],
                        "namespace": parts[3],
                        **server.pods[(parts[3], parts[5])],
                    }
                    self._json(200, {"kind": "Pod", "apiVersion": "v1", "metadata": meta})
                elif parts[4] != "configmaps" or (parts[3], parts[5]) not in server.configmaps:
                    self._json(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
                else:
                    data = server.configmaps[(parts[3], parts[5])]
                    meta = {"name": parts[5], "namespace": parts[3]}
                    self._json(
                        200,
                        {"kind": "ConfigMap", "apiVersion": "v1", "metadata": meta, "data": data},
                    )

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(crt, key)
        self._httpd.socket = context.wrap_socket(self._httpd.socket, server_side=True)
        self.port = int(self._httpd.server_address[1])
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def env(self) -> dict[str, str]:
        """What a pod sees: the service host and port, and where its account is mounted."""
        return {
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.port),
            "GPUSCALE_SERVICE_ACCOUNT_DIR": str(self.account),
        }

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
