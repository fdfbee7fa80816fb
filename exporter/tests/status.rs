//! `Unserved`, the one status mapping, from each outcome a handler meets: a refused
//! `try_run`, a spent `Deadline::run` around a started walk, a panicked walk.

use std::sync::mpsc;
use std::time::Duration;

use loopguard::deadline::Deadline;
use loopguard::pool::Pool;
use loopguard_exporter::Unserved;

#[test]
fn each_outcome_maps_to_its_status_and_retry_hint() {
    futures_lite::future::block_on(async {
        let pool = Pool::builder().workers(1).build().unwrap();
        let (release, held) = mpsc::channel::<()>();
        let busy = pool.try_run(move || held.recv().ok()).unwrap();

        let refused = Unserved::from(pool.try_run(|| ()).unwrap_err());
        assert_eq!(refused.status(), 503);
        assert_eq!(refused.retry_after_secs(), Some(1));
        assert!(matches!(refused, Unserved::Saturated { .. }), "{refused:?}");

        release.send(()).unwrap();
        busy.await.unwrap();

        let (release, held) = mpsc::channel::<()>();
        let started = pool.try_run(move || held.recv().ok()).unwrap();
        let spent = Deadline::after(Duration::ZERO)
            .run(started)
            .await
            .unwrap_err();
        let spent = Unserved::from(spent);
        assert_eq!((spent.status(), spent.retry_after_secs()), (504, None));
        release.send(()).unwrap();
        pool.wait_idle().await;

        let panicked = pool.try_run(|| panic!("the registry is gone")).unwrap();
        let failed = Unserved::from(panicked.await.unwrap_err());
        assert_eq!((failed.status(), failed.retry_after_secs()), (500, None));
        assert!(
            failed.to_string().contains("the registry is gone"),
            "{failed}"
        );

        pool.close();
        let closed = Unserved::from(pool.try_run(|| ()).unwrap_err());
        assert_eq!(closed, Unserved::Closed);
        assert_eq!((closed.status(), closed.retry_after_secs()), (503, None));
    });
}
