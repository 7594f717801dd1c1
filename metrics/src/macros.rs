//! [`metric_set!`](crate::metric_set): a stats struct declared once, with its metrics.

/// Declares a stats struct whose every field is a metric, and implements
/// [`MetricSet`](crate::MetricSet) for it (see the crate docs for the attribute). With a leading
/// `snapshot Name;`, it also declares `Name`, the same fields as plain values
/// ([`Snap`](crate::Snap)), and `fn snapshot(&self) -> Name`.
#[macro_export]
macro_rules! metric_set {
    (
        snapshot $snap:ident;
        $(#[$smeta:meta])*
        $svis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[metric($kind:ident $(, $($arg:tt)*)?)]
                $fvis:vis $field:ident : $fty:ty
            ),* $(,)?
        }
    ) => {
        $crate::metric_set! {
            $(#[$smeta])*
            $svis struct $name {
                $(
                    $(#[doc = $doc])*
                    #[metric($kind $(, $($arg)*)?)]
                    $fvis $field: $fty
                ),*
            }
        }

        #[doc = concat!("The values of a [`", stringify!($name), "`] at one moment.")]
        #[derive(Debug, Clone, Default, PartialEq, Eq)]
        $svis struct $snap {
            $(
                $(#[doc = $doc])*
                $fvis $field: <$fty as $crate::Snap>::Value,
            )*
        }

        impl $name {
            /// Reads every field (relaxed loads).
            $svis fn snapshot(&self) -> $snap {
                $snap {
                    $($field: $crate::Snap::snap(&self.$field)),*
                }
            }
        }
    };

    (
        $(#[$smeta:meta])*
        $svis:vis struct $name:ident {
            $(
                $(#[doc = $doc:literal])*
                #[metric($kind:ident $(, $($arg:tt)*)?)]
                $fvis:vis $field:ident : $fty:ty
            ),* $(,)?
        }
    ) => {
        $(#[$smeta])*
        $svis struct $name {
            $(
                $(#[doc = $doc])*
                $fvis $field: $fty,
            )*
        }

        impl $crate::MetricSet for $name {
            const METRICS: &'static [$crate::Metric] = &[
                $(
                    $crate::metric_set!(@build
                        $crate::metric_set!(@new $kind, stringify!($field), concat!($($doc, "\n"),*))
                            .nullable(<$fty as $crate::Read>::NULLABLE);
                        $($($arg)*)?
                    )
                ),*
            ];

            fn readings(&self) -> ::std::vec::Vec<$crate::Reading> {
                ::std::vec![$($crate::Read::read(&self.$field)),*]
            }
        }
    };

    (@new counter, $f:expr, $d:expr) => { $crate::Metric::new($f, $crate::Kind::Counter, $d) };
    (@new gauge, $f:expr, $d:expr) => { $crate::Metric::new($f, $crate::Kind::Gauge, $d) };
    (@new flag, $f:expr, $d:expr) => {
        $crate::Metric::new($f, $crate::Kind::Flag, $d).agg($crate::Agg::Max)
    };
    (@new histogram, $f:expr, $d:expr) => { $crate::Metric::new($f, $crate::Kind::Histogram, $d) };
    (@new text, $f:expr, $d:expr) => { $crate::Metric::new($f, $crate::Kind::Text, $d) };

    (@build $m:expr; $(,)?) => { $m };
    (@build $m:expr; ns $($rest:tt)*) => {
        $crate::metric_set!(@build $m.unit($crate::Unit::Ns); $($rest)*)
    };
    (@build $m:expr; ms $($rest:tt)*) => {
        $crate::metric_set!(@build $m.unit($crate::Unit::Ms); $($rest)*)
    };
    (@build $m:expr; bytes $($rest:tt)*) => {
        $crate::metric_set!(@build $m.unit($crate::Unit::Bytes); $($rest)*)
    };
    (@build $m:expr; permille $($rest:tt)*) => {
        $crate::metric_set!(@build $m.unit($crate::Unit::PerMille); $($rest)*)
    };
    (@build $m:expr; max $($rest:tt)*) => {
        $crate::metric_set!(@build $m.agg($crate::Agg::Max); $($rest)*)
    };
    (@build $m:expr; , $($rest:tt)*) => { $crate::metric_set!(@build $m; $($rest)*) };
    (@build $m:expr; $key:ident = $val:expr $(, $($rest:tt)*)?) => {
        $crate::metric_set!(@build $m.$key($val); $($($rest)*)?)
    };
}
