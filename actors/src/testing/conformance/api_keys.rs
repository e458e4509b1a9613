//! The rules of API keys ([`KeyStore`](crate::KeyStore)).

use super::Subject;
use crate::ports::StoreErrorKind;
use crate::tenancy::{NewKey, Scope};

/// A key is kept once under its id — a second key of the same id is
/// refused and changes nothing — listed by tenant, revoked once (its first
/// revocation's time stays), and all of it survives a reopen; a key's
/// secret is never kept.
pub(super) async fn api_keys_are_kept_once_listed_by_tenant_revoked_once_and_survive_a_reopen(
    subject: Subject,
) {
    let store = &subject.store;
    let a = NewKey::make("acme", Scope::Operate, Some("ci".into()), 1_000).unwrap();
    let b = NewKey::make("acme", Scope::Read, None, 1_001).unwrap();
    let c = NewKey::make("zeta", Scope::Admin, None, 1_002).unwrap();
    for key in [&a, &b, &c] {
        store.create_api_key(key.key.clone()).await.unwrap();
    }
    let mut twin = NewKey::make("zeta", Scope::Admin, None, 1_003).unwrap();
    twin.key.id.clone_from(&a.key.id);
    let refused = store.create_api_key(twin.key).await.unwrap_err();
    assert_eq!(refused.kind(), StoreErrorKind::Invalid, "{refused}");
    assert_eq!(
        store.load_api_key(&a.key.id).await.unwrap(),
        Some(a.key.clone())
    );
    assert_eq!(store.load_api_key("000000000000").await.unwrap(), None);
    let mut acme = vec![a.key.clone(), b.key.clone()];
    acme.sort_by(|x, y| x.id.cmp(&y.id));
    assert_eq!(
        store.list_api_keys(Some("acme".into())).await.unwrap(),
        acme
    );
    assert_eq!(store.list_api_keys(None).await.unwrap().len(), 3);
    assert!(
        store
            .list_api_keys(Some("nobody".into()))
            .await
            .unwrap()
            .is_empty()
    );
    let revoked = store.revoke_api_key(&b.key.id, 2_000).await.unwrap();
    assert_eq!(revoked.and_then(|k| k.revoked_at_ms), Some(2_000));
    let again = store.revoke_api_key(&b.key.id, 3_000).await.unwrap();
    assert_eq!(again.and_then(|k| k.revoked_at_ms), Some(2_000));
    assert_eq!(store.revoke_api_key("000000000000", 1).await.unwrap(), None);
    store.flush().await.unwrap();
    let subject = subject.reopened().await;
    let store = &subject.store;
    let kept = store.load_api_key(&b.key.id).await.unwrap().unwrap();
    assert_eq!(kept.revoked_at_ms, Some(2_000));
    assert!(!kept.accepts(&b.secret));
    let kept = store.load_api_key(&a.key.id).await.unwrap().unwrap();
    assert!(kept.accepts(&a.secret));
    let all = serde_json::to_string(&store.list_api_keys(None).await.unwrap()).unwrap();
    for secret in [&a.secret, &b.secret, &c.secret] {
        assert!(!all.contains(secret.as_str()), "a secret was kept");
    }
}
