//! A mocked API server for unit tests (kube's tower-test pattern): every
//! request the code under test sends is checked, every answer is scripted.

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::json;
use tower_test::mock::{self, Handle};

pub type ApiHandle = Handle<Request<Body>, Response<Body>>;

/// A client whose requests arrive at the returned handle.
pub fn client() -> (Client, ApiHandle) {
    let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(svc, "ns"), handle)
}

/// A failure answer with an API `Status` body.
pub fn status(code: u16) -> Response<Body> {
    let body = json!({
        "apiVersion": "v1", "kind": "Status", "status": "Failure",
        "message": "scripted", "reason": "Scripted", "code": code,
    });
    Response::builder()
        .status(code)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

/// A 200 answer with a JSON body.
pub fn ok(body: serde_json::Value) -> Response<Body> {
    Response::builder()
        .status(200)
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

/// Answers the next request after checking its method and, if `rv` is given,
/// the resourceVersion precondition in its body.
pub async fn answer(h: &mut ApiHandle, method: &str, rv: Option<&str>, resp: Response<Body>) {
    let (req, send) = h.next_request().await.expect("a request");
    assert_eq!(req.method().as_str(), method, "{}", req.uri());
    if let Some(rv) = rv {
        let v = body_json(req).await;
        assert_eq!(
            v["metadata"]["resourceVersion"], rv,
            "fenced by the version last seen"
        );
    }
    send.send_response(resp);
}

pub async fn body_json(req: Request<Body>) -> serde_json::Value {
    let body = http_body_util::BodyExt::collect(req.into_body())
        .await
        .unwrap()
        .to_bytes();
    serde_json::from_slice(&body).unwrap()
}
