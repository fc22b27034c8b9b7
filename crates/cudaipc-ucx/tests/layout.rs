// SPDX-License-Identifier: MPL-2.0
#![cfg(unix)]

//! The binding's struct layouts against the installed `ucp.h`: a C program
//! prints each struct's size and each field's offset, compared with the
//! Rust declarations. Skipped where the header (libucx-dev) is missing.

use std::mem::{offset_of, size_of};
use std::process::Command;

use cudaipc_ucx::sys::*;

/// (C struct, its size here, [(field, offset here)]).
type Layout = (&'static str, usize, Vec<(&'static str, usize)>);

fn layouts() -> Vec<Layout> {
    vec![
        (
            "ucp_params_t",
            size_of::<ucp_params_t>(),
            vec![
                ("features", offset_of!(ucp_params_t, features)),
                ("request_size", offset_of!(ucp_params_t, request_size)),
                ("tag_sender_mask", offset_of!(ucp_params_t, tag_sender_mask)),
                (
                    "mt_workers_shared",
                    offset_of!(ucp_params_t, mt_workers_shared),
                ),
                ("name", offset_of!(ucp_params_t, name)),
            ],
        ),
        (
            "ucp_worker_params_t",
            size_of::<ucp_worker_params_t>(),
            vec![
                ("thread_mode", offset_of!(ucp_worker_params_t, thread_mode)),
                ("cpu_mask", offset_of!(ucp_worker_params_t, cpu_mask)),
                ("events", offset_of!(ucp_worker_params_t, events)),
                ("event_fd", offset_of!(ucp_worker_params_t, event_fd)),
                ("name", offset_of!(ucp_worker_params_t, name)),
                ("client_id", offset_of!(ucp_worker_params_t, client_id)),
            ],
        ),
        (
            "ucp_listener_params_t",
            size_of::<ucp_listener_params_t>(),
            vec![
                ("sockaddr", offset_of!(ucp_listener_params_t, sockaddr)),
                (
                    "accept_handler",
                    offset_of!(ucp_listener_params_t, accept_handler),
                ),
                (
                    "conn_handler",
                    offset_of!(ucp_listener_params_t, conn_handler),
                ),
            ],
        ),
        (
            "ucp_listener_attr_t",
            size_of::<ucp_listener_attr_t>(),
            vec![("sockaddr", offset_of!(ucp_listener_attr_t, sockaddr))],
        ),
        (
            "ucp_conn_request_attr_t",
            size_of::<ucp_conn_request_attr_t>(),
            vec![
                (
                    "client_address",
                    offset_of!(ucp_conn_request_attr_t, client_address),
                ),
                ("client_id", offset_of!(ucp_conn_request_attr_t, client_id)),
            ],
        ),
        (
            "ucp_ep_params_t",
            size_of::<ucp_ep_params_t>(),
            vec![
                ("address", offset_of!(ucp_ep_params_t, address)),
                ("err_mode", offset_of!(ucp_ep_params_t, err_mode)),
                ("err_handler", offset_of!(ucp_ep_params_t, err_handler)),
                ("user_data", offset_of!(ucp_ep_params_t, user_data)),
                ("flags", offset_of!(ucp_ep_params_t, flags)),
                ("sockaddr", offset_of!(ucp_ep_params_t, sockaddr)),
                ("conn_request", offset_of!(ucp_ep_params_t, conn_request)),
                ("name", offset_of!(ucp_ep_params_t, name)),
                (
                    "local_sockaddr",
                    offset_of!(ucp_ep_params_t, local_sockaddr),
                ),
            ],
        ),
        (
            "ucp_request_param_t",
            size_of::<ucp_request_param_t>(),
            vec![
                ("flags", offset_of!(ucp_request_param_t, flags)),
                ("request", offset_of!(ucp_request_param_t, request)),
                ("cb", offset_of!(ucp_request_param_t, cb)),
                ("datatype", offset_of!(ucp_request_param_t, datatype)),
                ("user_data", offset_of!(ucp_request_param_t, user_data)),
                (
                    "reply_buffer",
                    offset_of!(ucp_request_param_t, reply_buffer),
                ),
                ("memory_type", offset_of!(ucp_request_param_t, memory_type)),
                ("recv_info", offset_of!(ucp_request_param_t, recv_info)),
                ("memh", offset_of!(ucp_request_param_t, memh)),
            ],
        ),
        (
            "ucp_tag_recv_info_t",
            size_of::<ucp_tag_recv_info_t>(),
            vec![("length", offset_of!(ucp_tag_recv_info_t, length))],
        ),
        (
            "ucs_sock_addr_t",
            size_of::<ucs_sock_addr_t>(),
            vec![("addrlen", offset_of!(ucs_sock_addr_t, addrlen))],
        ),
    ]
}

#[test]
fn struct_layouts_match_the_installed_ucp_header() {
    if !std::path::Path::new("/usr/include/ucp/api/ucp.h").exists() {
        eprintln!("SKIPPED: no ucp.h (libucx-dev)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("cudaipc-ucx-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut c = String::from(
        "#include <stdio.h>\n#include <stddef.h>\n#include <ucp/api/ucp.h>\nint main(void) {\n",
    );
    let layouts = layouts();
    for (name, _, fields) in &layouts {
        c += &format!("  printf(\"{name} %zu\\n\", sizeof({name}));\n");
        for (field, _) in fields {
            c += &format!("  printf(\"{name}.{field} %zu\\n\", offsetof({name}, {field}));\n");
        }
    }
    c += "  printf(\"ucs_status_t %zu\\n\", sizeof(ucs_status_t));\n  return 0;\n}\n";
    std::fs::write(dir.join("layout.c"), c).unwrap();
    let built = Command::new("cc")
        .arg("-o")
        .arg(dir.join("layout"))
        .arg(dir.join("layout.c"))
        .output()
        .expect("cc must be installed (build-essential)");
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(dir.join("layout")).output().unwrap();
    let printed = String::from_utf8(out.stdout).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let c_value = |key: &str| -> usize {
        printed
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key} ")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key} not printed:\n{printed}"))
    };
    let mut wrong = Vec::new();
    for (name, size, fields) in &layouts {
        if c_value(name) != *size {
            wrong.push(format!("sizeof({name}): C {} Rust {size}", c_value(name)));
        }
        for (field, offset) in fields {
            let key = format!("{name}.{field}");
            if c_value(&key) != *offset {
                wrong.push(format!(
                    "offsetof({key}): C {} Rust {offset}",
                    c_value(&key)
                ));
            }
        }
    }
    assert_eq!(
        c_value("ucs_status_t"),
        size_of::<ucs_status_t>(),
        "ucs_status_t"
    );
    assert!(
        wrong.is_empty(),
        "layouts differ from ucp.h:\n{}",
        wrong.join("\n")
    );
}
