//! `leasehold keys`: the API keys of tenants — made, listed, revoked — in
//! the data directory or store, or on a server with `--server URL` (as the
//! operator's token or a tenant's admin key, LEASEHOLD_API_TOKEN).
//!
//! A key's secret is printed once, when it is made; the store keeps only
//! its digest.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold::tenancy::{ApiKey, DEFAULT_TENANT, KeyView, NewKey, Scope};

use super::remote::Remote;
use super::runs::{existing_store, parse_tenant};
use super::{CliError, GlobalArgs, write_stdout};

/// `leasehold keys`.
#[derive(Debug, Args)]
pub(super) struct KeysArgs {
    /// A leasehold server (`http://127.0.0.1:7878`) instead of the data
    /// directory or store (LEASEHOLD_SERVER); LEASEHOLD_API_TOKEN is sent
    /// as its bearer token.
    #[arg(long, global = true, value_name = "URL", env = "LEASEHOLD_SERVER")]
    server: Option<String>,
    /// What to do.
    #[command(subcommand)]
    command: KeysCommand,
}

#[derive(Debug, Subcommand)]
enum KeysCommand {
    /// Make a key; its secret is printed once, and kept nowhere.
    Create(CreateArgs),
    /// The keys (revoked ones too), never their secrets.
    List(ListArgs),
    /// Revoke a key: every executor sharing the store refuses it at once.
    Revoke(RevokeArgs),
}

#[derive(Debug, Args)]
struct CreateArgs {
    /// The tenant the key acts for (`default` for the runs started without
    /// a tenant's key).
    #[arg(long, value_parser = parse_tenant)]
    tenant: String,
    /// `read`; `operate` (also start, pause, steer, resume, cancel,
    /// reconcile and fork runs); `admin` (also the tenant's keys).
    #[arg(long)]
    scope: Scope,
    /// A label for the key (`ci`, `alice's laptop`).
    #[arg(long)]
    name: Option<String>,
    /// The key as JSON, its secret included, instead of the secret alone.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct ListArgs {
    /// Only the keys of this tenant.
    #[arg(long, value_parser = parse_tenant)]
    tenant: Option<String>,
    /// The keys as a JSON array.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
struct RevokeArgs {
    /// The key's id (`leasehold keys list`; the part of its secret after
    /// `lh_`, before the next `_`).
    id: String,
}

/// Does what `args` asks.
pub(super) async fn run(global: &GlobalArgs, args: KeysArgs) -> Result<ExitCode, CliError> {
    let config = global.load(&[])?;
    if let Some(url) = &args.server {
        let client = Remote::new(
            url,
            config.api_token.value.clone(),
            Duration::from_secs(120),
        )?;
        return remote(&client, args.command).await;
    }
    // A key may be made before the first `serve`, as a deployment is set
    // up: `create` makes the store; the others read one that exists.
    let store = match &args.command {
        KeysCommand::Create(_) => config.open_store()?,
        _ => existing_store(&config)?,
    };
    match args.command {
        KeysCommand::Create(create) => {
            let now = leasehold::Clock::now_unix_ms(&leasehold::SystemClock);
            let made = NewKey::make(&create.tenant, create.scope, create.name, now)
                .map_err(CliError::other)?;
            store.create_api_key(made.key.clone()).await?;
            store.flush().await?;
            print_made(&view(&made.key), &made.secret, create.json)
        }
        KeysCommand::List(list) => {
            let keys = store.list_api_keys(list.tenant).await?;
            print_keys(keys.iter().map(view).collect(), list.json)
        }
        KeysCommand::Revoke(revoke) => {
            let now = leasehold::Clock::now_unix_ms(&leasehold::SystemClock);
            let Some(key) = store.revoke_api_key(&revoke.id, now).await? else {
                return Err(CliError::other(format!(
                    "no API key {}: `leasehold keys list` lists them",
                    revoke.id
                )));
            };
            store.flush().await?;
            write_stdout(&format!(
                "revoked {} (tenant {}, scope {})\n",
                key.id, key.tenant, key.scope
            ))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

async fn remote(client: &Remote, command: KeysCommand) -> Result<ExitCode, CliError> {
    match command {
        KeysCommand::Create(create) => {
            let body = serde_json::json!({
                "tenant": create.tenant,
                "scope": create.scope,
                "name": create.name,
            });
            let mut made = client.post_json("/keys", &body).await?;
            let secret = made
                .as_object_mut()
                .and_then(|object| object.remove("secret"))
                .and_then(|secret| secret.as_str().map(str::to_owned))
                .ok_or_else(|| CliError::other("the server's answer holds no key secret"))?;
            print_made(&made, &secret, create.json)
        }
        KeysCommand::List(list) => {
            let path = match &list.tenant {
                Some(tenant) => format!("/keys?tenant={tenant}"),
                None => "/keys".to_owned(),
            };
            let keys = client.get_json(&path).await?;
            let keys = keys.as_array().cloned().unwrap_or_default();
            print_keys(keys, list.json)
        }
        KeysCommand::Revoke(revoke) => {
            let key = client
                .post_json(
                    &format!("/keys/{}/revoke", revoke.id),
                    &serde_json::json!({}),
                )
                .await?;
            let field = |name: &str| {
                key.get(name)
                    .and_then(|v| v.as_str())
                    .unwrap_or("?")
                    .to_owned()
            };
            write_stdout(&format!(
                "revoked {} (tenant {}, scope {})\n",
                field("id"),
                field("tenant"),
                field("scope")
            ))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A key as JSON, as the API shows it: everything but its digest.
fn view(key: &ApiKey) -> serde_json::Value {
    serde_json::to_value(KeyView::from(key.clone())).unwrap_or_default()
}

fn print_made(key: &serde_json::Value, secret: &str, json: bool) -> Result<ExitCode, CliError> {
    if json {
        let mut key = key.clone();
        if let Some(object) = key.as_object_mut() {
            object.insert("secret".to_owned(), secret.into());
        }
        write_stdout(&format!("{key}\n"))?;
    } else {
        write_stdout(&format!("{secret}\n"))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_keys(keys: Vec<serde_json::Value>, json: bool) -> Result<ExitCode, CliError> {
    if json {
        write_stdout(&format!("{}\n", serde_json::Value::Array(keys)))?;
        return Ok(ExitCode::SUCCESS);
    }
    if keys.is_empty() {
        write_stdout(&format!(
            "no API key yet: `leasehold keys create --tenant {DEFAULT_TENANT} --scope read` makes one\n"
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    use leasehold::printable::columns::{self, Align};
    let text = |key: &serde_json::Value, name: &str| {
        key.get(name)
            .and_then(|v| v.as_str())
            .map(|v| leasehold::printable::printable(v).into_owned())
            .unwrap_or_else(|| "-".to_owned())
    };
    let rows: Vec<[String; 5]> = keys
        .iter()
        .map(|key| {
            let revoked = key
                .get("revoked_at_ms")
                .and_then(serde_json::Value::as_u64)
                .map_or_else(
                    || "-".to_owned(),
                    |ms| {
                        humantime::format_rfc3339_seconds(
                            std::time::UNIX_EPOCH + Duration::from_millis(ms),
                        )
                        .to_string()
                    },
                );
            [
                text(key, "id"),
                text(key, "tenant"),
                text(key, "scope"),
                text(key, "name"),
                revoked,
            ]
        })
        .collect();
    let header = ["id", "tenant", "scope", "name", "revoked"];
    let widths = columns::widths(&header, &rows);
    let mut out = String::new();
    for row in std::iter::once(header.map(str::to_owned)).chain(rows) {
        for (i, cell) in row.iter().enumerate() {
            columns::push_padded(&mut out, cell, widths[i], Align::Left);
            out.push_str(if i == 4 { "\n" } else { "  " });
        }
    }
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}
