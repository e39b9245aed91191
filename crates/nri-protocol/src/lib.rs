//! NRI wire protocol: generated `nri.pkg.api.v1alpha1` types and ttrpc services, plus the
//! connection multiplexer that carries both services over one socket.
