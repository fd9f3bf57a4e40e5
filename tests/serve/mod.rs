//! An axum router served on 127.0.0.1 with an ephemeral port and connect
//! info, for the suites that speak to a real server.

use std::net::SocketAddr;

use tokio::net::TcpListener;

/// Serves `app` on 127.0.0.1:0 with `ConnectInfo<SocketAddr>`, in a task;
/// its address.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    addr
}
